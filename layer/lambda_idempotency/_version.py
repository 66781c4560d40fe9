"""The package's version, as constants: reading package metadata costs a cold start.

Semantic versioning: a release that breaks a documented use (or that a running version
cannot share a table with) raises the major number; CHANGELOG.md says what each one changes.

In the source, VERSION is the version the code is on its way to (`0.2.0.dev0`), and a
release (`0.2.0`) only in the one commit that makes it. Every build (a wheel, an sdist, the
Lambda layer) rewrites both lines in what it builds, never in the source (setup.py): a
release's version only when built from its own commit, else `0.2.0.dev0+g<12 hex of the
commit>` (`.dirty` when built with changes not committed), or `+unknown` outside git. COMMIT
is then the full commit id, None when not known. Run from the source itself (an editable
install), they say the source's version and None.
"""

VERSION = "0.2.0.dev0"
COMMIT: str | None = None
