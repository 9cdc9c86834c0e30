"""A stand-in for a warm pool's MPI job, for tests/training/test_warm_pool_rules.py: started as
the pool's launcher (``python _fake_pool.py python -m training.jobs.warm_worker SOCKET PID``),
it plays rank 0 of training.jobs.warm_worker on the pool's socket without MPI or torch. Each
trial message's ``spec.own_loop["params"]["do"]`` says what it does: ``complete`` (replies
``{"state": "complete", "n": trials so far}``), ``retire`` (replies and asks to be retired),
``die`` (writes a rank's error file into the trial's error_dir, then exits 3), ``exit`` (exits 5,
nothing written), ``hang`` (never replies), ``close`` (closes the socket, exits 0), ``linger``
(closes the socket and goes on running), ``split`` (replies in two pieces, 0.2 s apart). A reply
says which environment variable ``FAKE_POOL_TAG`` the job got and its parent's pid (argv[-1]);
``FAKE_POOL_STUCK_ONCE=FILE``: the first job (the one that creates FILE, with its pid) hangs
before connecting, as a job stuck in MPI_Init. ``retire`` is in a reply only when it is true, as rank 0 of the real pool writes it; ``raise``
replies a failed trial with its traceback, as rank 0 does for an exception in the trial."""

import json
import os
import socket
import sys
import time

path = sys.argv[-2]
if os.environ.get("FAKE_POOL_NEVER_CONNECTS"):
    print("fake pool: failed before MPI_Init", flush=True)
    sys.exit(4)
stuck = os.environ.get("FAKE_POOL_STUCK_ONCE")  # a file: the first job writes its pid, hangs
if stuck:
    try:
        with open(stuck, "x") as f:
            f.write(str(os.getpid()))
    except FileExistsError:
        pass
    else:
        print("fake pool: stuck before MPI_Init", flush=True)
        time.sleep(600)
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(path)
buffer = b""
served = 0
while True:
    chunk = conn.recv(1 << 16)
    if not chunk:
        sys.exit(0)
    buffer += chunk
    while b"\n" in buffer:
        line, _, buffer = buffer.partition(b"\n")
        message = json.loads(line)
        do = message["spec"]["own_loop"]["params"]["do"]
        served += 1
        print(f"fake pool: trial {served} does {do}", flush=True)
        if do in ("complete", "retire", "split"):
            reply = {"state": "complete", "n": served, "tag": os.environ.get("FAKE_POOL_TAG"),
                     "parent": int(sys.argv[-1]), "first_step_time": 1000.5,
                     "threads": os.environ.get("OMP_NUM_THREADS")}
            if do == "retire":
                reply["retire"] = True
            data = json.dumps(reply).encode() + b"\n"
            if do == "split":
                conn.sendall(data[:5])
                time.sleep(0.2)
                data = data[5:]
            conn.sendall(data)
        elif do == "die":
            with open(os.path.join(message["error_dir"], "rank1.json"), "w") as f:
                json.dump({"exit_reason": "RuntimeError: rank 1 broke"}, f)
            sys.exit(3)
        elif do == "raise":  # what rank 0 writes for a trial that raised: the pool lives on
            reply = {"state": "failed", "exit_reason": "ValueError: bad batch",
                     "traceback": "Traceback (most recent call last):\nValueError: bad batch"}
            conn.sendall(json.dumps(reply).encode() + b"\n")
        elif do == "exit":
            sys.exit(5)
        elif do == "hang":
            time.sleep(600)
        elif do == "close":
            conn.close()
            sys.exit(0)
        elif do == "linger":
            conn.close()
            time.sleep(600)
