"""The protocol: claim the key or learn who holds it, run, then complete or release.

`run` drives the steps top to bottom for a plain call (`coroutines` for a coroutine function,
`durable` across a durable execution's invocations); `claiming`, `replaying`, `completing` and
`waiting` are the steps; `engine` is what they share per decorator."""
