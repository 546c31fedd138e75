"""The Agent's receivers: what reads the node's inputs. The Profilers' SHM regions
(discovered, refused, read, recovered into logs and retired), the hang-event FIFO, Inject's
names and step markers, and the tenants' homes they live in. A receiver knows nothing of what
is made of what it reads (state), nor of who asks for it (exporters)."""
