# The receiving end of one copy stream (see `copy_stream` in script.rs), run by `python3 -c`
# on the node that receives, in the model folder DEST. One process does what the shell loop
# needs three for (dd, tee and the hasher): each chunk the sender writes is read once from
# fd 3, hashed, and written at its offset. Same input (stdin, `copy_input`) and output lines
# as the shell loop.
#
# Nothing is written through a link: every folder under DEST and every file is opened
# relative to its parent with O_NOFOLLOW, and a partial file or journal that is a link, not a
# plain file or a file with other names (hard links) is refused with an `err` line, untouched.
# A finished file is flushed to disk (fsync) before it is renamed into place, its folder after,
# and only then recorded in the hash cache: after a power loss the cache never vouches for
# bytes that were not on disk.
#
# argv: SENDER_ERR CACHE PARTIAL_SUFFIX JOURNAL_SUFFIX DEST LINKS (what a refusal says to do)
import fcntl
import hashlib
import os
import stat
import sys

SENDER_ERR, CACHE, P, JR, D, LINKS = sys.argv[1:7]
CHUNK = 1 << 20
buf = bytearray(CHUNK)
view = memoryview(buf)
try:
    # A bigger pipe: fewer wake-ups of this process and of the ssh that feeds it.
    fcntl.fcntl(3, fcntl.F_SETPIPE_SZ, CHUNK)
except (OSError, AttributeError):
    pass
# The model folder itself may be reached through a link (the user's choice of cache); below
# it, nothing is followed. The shell started this process inside it.
ROOT = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
NEW = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def say(*fields):
    sys.stdout.write("\t".join(str(f) for f in fields) + "\n")
    sys.stdout.flush()


def fail(path, offset, what, sender=True):
    msg = ""
    if sender:
        try:
            with open(SENDER_ERR, errors="replace") as f:
                msg = " ".join(f.read().splitlines()[-3:]).replace("\t", " ").strip()
        except OSError:
            pass
    say("err", path, offset, what + (": " + msg if msg else ""))
    sys.exit(1)


def who():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())


def is_link(name, dfd):
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dfd).st_mode)
    except OSError:
        return False


def beneath(path):
    """The folder of `path` (relative to DEST), opened without following any link and created
    where missing, and the file's own name. Refuses (with an `err` line) a path that leaves
    the folder, or a link or a file where a folder should be."""
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        fail(path, 0, f"refused {path}: not a plain path inside {D}", False)
    fd = os.dup(ROOT)
    done = []
    for part in parts[:-1]:
        done.append(part)
        try:
            os.mkdir(part, 0o777, dir_fd=fd)
        except FileExistsError:
            pass
        except OSError:
            fail(path, 0, f"cannot create {'/'.join(done)} in {D} (not writable by {who()}?)", False)
        try:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            what = "a symbolic link" if is_link(part, fd) else "not a folder"
            fail(path, 0, f"refused {'/'.join(done)} in {D}: it is {what}; {LINKS}", False)
        os.close(fd)
        fd = nfd
    return fd, parts[-1]


def open_plain(path, dfd, name, suffix, flags):
    """`name + suffix` in the folder `dfd`, created if missing, never through a link; refused
    unless it is a plain file with no other name."""
    shown = path + suffix
    try:
        fd = os.open(name + suffix, flags | NEW, 0o666, dir_fd=dfd)
    except OSError as e:
        if is_link(name + suffix, dfd):
            fail(path, 0, f"refused {shown}: it is a symbolic link; {LINKS}", False)
        fail(path, 0, f"cannot write {shown}: {e.strerror}", False)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "not a plain file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} names (hard links)"
        fail(path, 0, f"refused {shown}: it is {what}; {LINKS}", False)
    return fd


def remove(dfd, name):
    try:
        os.remove(name, dir_fd=dfd)
    except FileNotFoundError:
        pass


status = 0
fd = -1
dfd = -1
for line in sys.stdin:
    kind, *f = line.rstrip("\n").split("\t")
    if kind == "file":
        size, want, path = int(f[0]), f[1], f[2]
        if dfd >= 0:
            os.close(dfd)
        dfd, name = beneath(path)
        fd = open_plain(path, dfd, name, P, os.O_RDWR)
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
                fail(path, offset, f"cannot write {path}{P}: {e.strerror}", False)
            at, left = at + n, left - n
        j = open_plain(path, dfd, name, JR, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(j, f"{offset} {length}\n".encode())
        except OSError as e:
            fail(path, offset, f"cannot record the range in {path}{JR}: {e.strerror}", False)
        finally:
            os.close(j)
        say("ok", length, path)
    elif kind == "end":
        got = digest.hexdigest()
        st = os.fstat(fd)
        if got == want and st.st_size == size:
            try:
                # On disk before it has its name, its name on disk before the cache vouches.
                os.fsync(fd)
                os.replace(name + P, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                os.fsync(dfd)
            except OSError as e:
                fail(path, 0, f"cannot put {path} in place: {e.strerror}", False)
            os.close(fd)
            remove(dfd, name + JR)
            ns = st.st_mtime_ns
            try:
                # The scan's hash cache, in `find -printf '%T@'`'s format: the next scan trusts it.
                with open(CACHE, "a") as c:
                    c.write(f"{size}\t{ns // 10**9}.{ns % 10**9:09d}0\t{got}\t-\t{path}\n")
                    c.flush()
                    os.fsync(c.fileno())
            except OSError:
                pass
            say("done", path)
        else:
            os.close(fd)
            remove(dfd, name + P)
            remove(dfd, name + JR)
            say("bad", path, f"{got} ({st.st_size} bytes)")
            status = 1
sys.exit(status)
