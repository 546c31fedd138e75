"""The node Agent's loop and its inputs: SHM regions of the Profilers (discovered, refused,
read, recovered and retired), the hang-event FIFO, Inject's names, the node snapshot
diagnosis reads."""
