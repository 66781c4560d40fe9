"""The package's version, as a constant: reading package metadata costs a cold start.

Semantic versioning: a release that breaks a documented use (or that a running version
cannot share a table with) raises the major number; CHANGELOG.md says what each one changes.
"""

VERSION = "0.2.0"
