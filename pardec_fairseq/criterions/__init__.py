"""Training criterions of the plugin: the blockwise and glancing block losses (issues 4 and 5)
register themselves from modules in this package."""
