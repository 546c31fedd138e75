"""The node Agent's inputs and its state: SHM regions of the Profilers (discovered, refused,
read, recovered and retired), the hang-event FIFO, Inject's names, the node snapshot
diagnosis reads."""
