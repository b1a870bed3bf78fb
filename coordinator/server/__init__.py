"""One Cohort node: its listeners, connections, the API dispatch, topics and peers."""
