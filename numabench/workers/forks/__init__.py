"""Workers forked from a server per side (``--numa-forkserver``) instead of exec'd.

- server.py: a side's fork server: imports the side's worker code and torch once, forks each worker
- client.py: what numactl starts in a forked worker's place: hands its policy, CPUs and streams over
- pool.py: the session's servers, one per side: started, attached to a side, ended with the session
"""
