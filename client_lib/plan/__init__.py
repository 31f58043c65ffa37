"""The user's process before and after the run: materialise and hash the graph, rewrite
it, submit it to the scheduler, report what the run did."""
