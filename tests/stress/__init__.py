"""Fault campaigns: each module injects one kind of fault into real processes and reports
what happened. The suite runs them at small sizes (``tests/reliability``); run one at full
size as a script, e.g. ``python -m tests.stress.kill_restart --rounds 20 --stores 100``
(see RELIABILITY.md). Every loop is bounded in count and time, and all traffic stays on
127.0.0.1.
"""
