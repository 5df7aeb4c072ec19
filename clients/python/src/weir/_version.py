"""The package version: the Weir project's Cargo version (``Cargo.toml``, ``[package]``).

A test checks the two are equal, so a release of the cluster and of this client carry one
number.
"""

__version__ = "0.1.0"
