"""Continuous crawls: when a fetched page is seen again, and what counts as a change.

Pure parts, no I/O: the state a tracked page carries in its request's meta
(:mod:`~crawlfleet.revisit.state`), the policy that picks its next interval
(:mod:`~crawlfleet.revisit.policy`), its settings (:mod:`~crawlfleet.revisit.config`)
and the fingerprint of what a spider extracts (:mod:`~crawlfleet.revisit.fingerprint`).
The node's parts that use them: :mod:`crawlfleet.middlewares.revisit`,
:mod:`crawlfleet.middlewares.changes` and :mod:`crawlfleet.node.revisits`.
"""
