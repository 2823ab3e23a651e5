# The receiving end of one copy stream (see `copy_stream` in script.rs), run by `python3 -c`
# on the node that receives. One process does what the shell loop needs three for (dd, tee and
# the hasher): each chunk the sender writes is read once from fd 3, hashed, and written at its
# offset. Same input (stdin, `copy_input`) and output lines as the shell loop.
#
# argv: SENDER_ERR CACHE PARTIAL_SUFFIX JOURNAL_SUFFIX DEST
import fcntl
import hashlib
import os
import sys

SENDER_ERR, CACHE, P, JR, D = sys.argv[1:6]
CHUNK = 1 << 20
buf = bytearray(CHUNK)
view = memoryview(buf)
try:
    # A bigger pipe: fewer wake-ups of this process and of the ssh that feeds it.
    fcntl.fcntl(3, fcntl.F_SETPIPE_SZ, CHUNK)
except (OSError, AttributeError):
    pass


def say(*fields):
    sys.stdout.write("\t".join(str(f) for f in fields) + "\n")
    sys.stdout.flush()


def fail(path, offset, what):
    try:
        with open(SENDER_ERR, errors="replace") as f:
            msg = " ".join(f.read().splitlines()[-3:]).replace("\t", " ").strip()
    except OSError:
        msg = ""
    say("err", path, offset, what + (": " + msg if msg else ""))
    sys.exit(1)


def who():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())


status = 0
fd = -1
for line in sys.stdin:
    kind, *f = line.rstrip("\n").split("\t")
    if kind == "file":
        size, want, path = int(f[0]), f[1], f[2]
        parent = os.path.dirname(path)
        try:
            if parent:
                os.makedirs(parent, exist_ok=True)
        except OSError:
            fail(path, 0, f"cannot create {parent} in {D} (not writable by {who()}?)")
        try:
            fd = os.open(path + P, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            fail(path, 0, f"cannot write {path}{P}: {e.strerror}")
        digest = hashlib.sha256()
    elif kind == "range":
        offset, length, how = int(f[0]), int(f[1]), f[2]
        at, left = offset, length
        if how == "keep":
            # Written by an interrupted run: hashed from disk, once.
            while left:
                n = os.preadv(fd, [view[: min(left, CHUNK)]], at)
                if n == 0:
                    fail(path, offset, f"cannot read back {path}{P}")
                digest.update(view[:n])
                at, left = at + n, left - n
            continue
        while left:
            n = os.readv(3, [view[: min(left, CHUNK)]])
            if n == 0:
                fail(path, offset, f"the stream ended after {length - left} of {length} bytes")
            digest.update(view[:n])
            done = 0
            try:
                while done < n:
                    done += os.pwrite(fd, view[done:n], at + done)
            except OSError as e:
                fail(path, offset, f"cannot write {path}{P}: {e.strerror}")
            at, left = at + n, left - n
        with open(path + JR, "a") as j:
            j.write(f"{offset} {length}\n")
        say("ok", length, path)
    elif kind == "end":
        os.close(fd)
        got = digest.hexdigest()
        have = os.stat(path + P).st_size
        if got == want and have == size:
            os.replace(path + P, path)
            try:
                os.remove(path + JR)
            except FileNotFoundError:
                pass
            ns = os.stat(path).st_mtime_ns
            try:
                # The scan's hash cache, in `find -printf '%T@'`'s format: the next scan trusts it.
                with open(CACHE, "a") as c:
                    c.write(f"{size}\t{ns // 10**9}.{ns % 10**9:09d}0\t{got}\t-\t{path}\n")
            except OSError:
                pass
            say("done", path)
        else:
            for gone in (path + P, path + JR):
                try:
                    os.remove(gone)
                except FileNotFoundError:
                    pass
            say("bad", path, f"{got} ({have} bytes)")
            status = 1
sys.exit(status)
