"""Knowledge-base pages for tenant admins under /t/<tenant>/knowledge/ (docs/web-knowledge.md)."""
