"""Command-line tools of the plugin (the benchmark)."""
