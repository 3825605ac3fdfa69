"""pardec-fairseq: lossless parallel decoding for fairseq Transformer models."""
from setuptools import find_packages, setup

setup(
    name="pardec-fairseq",
    version="0.1.0",
    description="Lossless parallel decoding (IAD, GAD, BPD, Jacobi) for fairseq Transformer models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["pardec_fairseq", "pardec_fairseq.*"]),
    # fairseq itself comes from the ve-fairseq wheel, installed with --no-deps (see README):
    # its declared dependencies would pull a CUDA torch and a torchaudio that fails to load.
    install_requires=["numpy", "sacrebleu>=2.0", "subword-nmt", "sacremoses", "matplotlib", "pydivsufsort", "numba"],
    entry_points={
        "console_scripts": [
            "pardec-bench=pardec_fairseq.cli.bench:main",
            "pardec-analyze-heads=pardec_fairseq.cli.analyze_heads:main",
            "pardec-ddgviz=pardec_fairseq.cli.ddgviz:main",
            "pardec-pass-cost=pardec_fairseq.cli.pass_cost:main",
        ]
    },
)
