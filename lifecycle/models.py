"""The data life's own records (retention settings, holds, requests)."""
