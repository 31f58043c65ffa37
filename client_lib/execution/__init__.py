"""What runs inside the rewritten graph, on whatever executes its tasks: store specs,
load and store tasks, leases, the store queue, warning replay, the worker plugin."""
