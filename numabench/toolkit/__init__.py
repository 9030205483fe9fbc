"""What a family's worker uses inside its rank, below the families and the worker engine
(numabench.workers) alike: ``hostmem`` placed, touched, optionally pinned host buffers;
``inject`` the gate's injected slowdown (real extra work inside a timed phase);
``rank_barrier`` ranks meeting through files; ``rendezvous`` a process group on the port rank
0 holds.
"""
