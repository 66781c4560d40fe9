"""The package's version, as a constant: reading package metadata costs a cold start."""

VERSION = "0.1.0"
