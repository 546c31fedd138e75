"""A master Agent: slaves' node state over gRPC (agent-master-slave v1), kept across restarts,
and the whole job's view."""
