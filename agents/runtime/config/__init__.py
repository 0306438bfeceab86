"""Declarative configuration: the document format, loading it safely, migrating older
versions and compiling it (no Django). docs/configuration-as-code.md describes it."""
