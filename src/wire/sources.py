"""Source connectors (public namespace): ``wire.sources.files(...)``."""

from wire.connectors.files import FileSource, files

__all__ = ["FileSource", "files"]
