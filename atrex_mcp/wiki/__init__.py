"""The GPU wiki: search and read gpu_wiki/ (articles and validated kernels) and the source
roots a user added. `atrex_mcp.wiki.index.WikiIndex` is the whole API the server and the CLI use;
it is imported from its module, not from here, so that the server's start-up does not load the
search engine (whoosh) before a wiki tool is called."""
