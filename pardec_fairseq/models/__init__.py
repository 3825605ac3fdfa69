"""Model architectures of the plugin: the blockwise-head Transformer and the NAR block drafter
(issues 4 and 5) register themselves from modules in this package."""
