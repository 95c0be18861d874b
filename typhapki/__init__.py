"""typhapki: mutual TLS between Calico Felix and Typha, and a gated Typha ferm rule."""

__version__ = "0.1.0"
