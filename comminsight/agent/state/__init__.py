"""The node's state, made from what the receivers read: the agent-master-slave rows (the one
model every view, the master and the API read), the snapshot hang diagnosis reads, the recent
ops window, and which job, rank and GPU each process is."""
