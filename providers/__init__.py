"""Providers: tenant provider connections (Django) around the model adapters."""
