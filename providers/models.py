# Models arrive with their issue (see DESIGN.md).
