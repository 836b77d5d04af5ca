"""The GPU wiki: search and read gpu_wiki/ (articles and validated kernels) and the source
roots a user added. `WikiIndex` is the whole API the server and the CLI use."""

from atrex_mcp.wiki.index import WikiIndex
from atrex_mcp.wiki.models import RefreshReport, WikiDoc, WikiHit, WikiRoot
from atrex_mcp.wiki.roots import add_root, load_roots

__all__ = ["RefreshReport", "WikiDoc", "WikiHit", "WikiIndex", "WikiRoot", "add_root", "load_roots"]
