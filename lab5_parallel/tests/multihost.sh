#!/bin/sh
# Two hosts on one machine: runs PROGRAM under mpirun with NP ranks (even; NP/2 per host) on two
# emulated hosts, each a network namespace of its own with its own address and host name, joined
# by a veth pair (a virtual cable; no traffic leaves the machine):
#
#   lab5_parallel/tests/multihost.sh NP PROGRAM [ARGS...]            (as root)
#
#   host    namespace        address          interface
#   host-a  mls-mh<pid>-a    10.77.0.1/24     mlsmh<pid>a      mpirun and rank 0 run here
#   host-b  mls-mh<pid>-b    10.77.0.2/24     mlsmh<pid>b      OpenMPI starts its daemon here
#
# It is the command a course runs on two real machines (handouts/lab5/README.md), through
# run_mpi.sh with MLS_MPI_HOSTFILE set: a hostfile naming host-a and host-b, TCP only
# (--mca btl tcp,self), MPI's messages and OpenMPI's launch traffic restricted to 10.77.0.0/24,
# and OpenMPI's remote launch (plm_rsh_agent, ssh on real machines) a small agent that runs
# OpenMPI's daemon command in the namespace of the host it names (ip netns exec). Each namespace
# resolves the host names through its own /etc/hosts (ip netns exec mounts /etc/netns/<ns>/hosts
# over it; where /etc is read-only, the hostfile names the hosts by address). The ranks see only
# their namespace's interfaces: the veth and the namespace's own loopback (a process reaching its
# own host's address goes through it, as on a real machine); never the root namespace's.
#
# Everything is torn down on exit, on failure and on INT/TERM/HUP (the processes left in the
# namespaces are killed, the namespaces deleted, which deletes the veth pair). A run killed with
# SIGKILL cannot clean up: the next run deletes namespaces whose run is gone.
# Not root, or no `ip netns`: prints "SKIPPED: ..." and exits 0 (CTest's SKIP_REGULAR_EXPRESSION).
set -u
if [ $# -lt 2 ]; then
  echo "multihost.sh: usage: multihost.sh NP PROGRAM [ARGS...] (NP even, NP/2 ranks per host)" >&2
  exit 2
fi
np=$1
shift
case $np in
  '' | *[!0-9]*) echo "multihost.sh: NP must be a positive even number of ranks, got '$np'" >&2; exit 2 ;;
esac
if [ "$np" -lt 2 ] || [ $((np % 2)) -ne 0 ]; then
  echo "multihost.sh: NP must be a positive even number of ranks (NP/2 per host), got $np" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)

if [ "$(id -u)" != 0 ]; then
  echo "SKIPPED: multihost.sh needs root to create network namespaces (ip netns add); running as uid $(id -u)"
  exit 0
fi
if ! command -v ip >/dev/null 2>&1 || ! ip netns list >/dev/null 2>&1; then
  echo "SKIPPED: 'ip netns' is unavailable (Debian: apt-get install iproute2)"
  exit 0
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIPPED: mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
  exit 0
fi

# Namespaces left by a run that was killed (SIGKILL: no trap): their run's process is gone.
for ns in $(ip netns list 2>/dev/null | sed -n 's/^\(mls-mh[0-9][0-9]*-[ab]\).*/\1/p'); do
  owner=${ns#mls-mh}
  owner=${owner%-?}
  if ! kill -0 "$owner" 2>/dev/null; then
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null && echo "multihost: removed $ns, left by run $owner"
    rm -rf "/etc/netns/$ns"
  fi
done

tag=$$
nsa=mls-mh$tag-a
nsb=mls-mh$tag-b
veth_a=mlsmh${tag}a
veth_b=mlsmh${tag}b
net=10.77.0.0/24
tmp=""
child=""

cleanup() {
  trap - EXIT INT TERM HUP
  for ns in "$nsa" "$nsb"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
  done
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  sleep 0.2
  for ns in "$nsa" "$nsb"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  [ -n "$tmp" ] && rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "multihost: interrupted, tearing down" >&2; exit 130' INT
trap 'echo "multihost: terminated, tearing down" >&2; exit 143' TERM
trap 'exit 129' HUP

if ! err=$(ip netns add "$nsa" 2>&1); then
  echo "SKIPPED: cannot create a network namespace here (ip netns add: $err)"
  exit 0
fi
setup() {
  ip netns add "$nsb" &&
    ip link add "$veth_a" type veth peer name "$veth_b" &&
    ip link set "$veth_a" netns "$nsa" &&
    ip link set "$veth_b" netns "$nsb" &&
    ip -n "$nsa" addr add 10.77.0.1/24 dev "$veth_a" &&
    ip -n "$nsb" addr add 10.77.0.2/24 dev "$veth_b" &&
    ip -n "$nsa" link set "$veth_a" up && ip -n "$nsb" link set "$veth_b" up &&
    ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up
}
if ! err=$(setup 2>&1); then
  echo "SKIPPED: cannot join two network namespaces by a veth pair here ($err)"
  exit 0
fi
# The hostfile names the hosts as on real machines, resolved by each namespace's /etc/hosts;
# where /etc cannot be written, it names them by address.
host_a=host-a
host_b=host-b
for ns in "$nsa" "$nsb"; do
  if ! { mkdir -p "/etc/netns/$ns" &&
    printf '127.0.0.1 localhost\n10.77.0.1 host-a\n10.77.0.2 host-b\n' >"/etc/netns/$ns/hosts"; } 2>/dev/null; then
    host_a=10.77.0.1
    host_b=10.77.0.2
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mls-multihost.XXXXXX")
printf '%s slots=%d\n%s slots=%d\n' "$host_a" $((np / 2)) "$host_b" $((np / 2)) >"$tmp/hostfile"
# OpenMPI's remote launch: "AGENT HOST COMMAND..." as it would run "ssh HOST COMMAND...": the
# command runs in HOST's namespace, under HOST's name, through a shell (as ssh's remote shell).
cat >"$tmp/agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1
shift
case \$host in
  host-a | 10.77.0.1) ns=$nsa name=host-a ;;
  host-b | 10.77.0.2) ns=$nsb name=host-b ;;
  *) echo "multihost agent: no host '\$host' (expected host-a or host-b)" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts /bin/sh -c 'hostname "\$0" && exec /bin/sh -c "\$1"' "\$name" "\$*"
AGENT
chmod +x "$tmp/agent"

echo "multihost: $np ranks on host-a ($nsa, 10.77.0.1) and host-b ($nsb, 10.77.0.2), TCP over $veth_a <-> $veth_b"
# mpirun itself runs on host-a (its namespace, its name): it starts host-a's ranks itself and
# host-b's daemon through the agent; the daemon connects back to mpirun over the veth (from the
# root namespace, mpirun's address would be unreachable from host-b). Each namespace's loopback
# must be up: with it down, host-a's ranks cannot reach mpirun at 10.77.0.1 and the job hangs.
on_host_a() {
  MLS_MPI_TIMEOUT=$limit MLS_MPI_HOSTFILE=$tmp/hostfile MLS_MPI_NET=$net MLS_MPI_RSH_AGENT=$tmp/agent \
    ip netns exec "$nsa" unshare --uts /bin/sh -c 'hostname host-a && exec "$@"' sh "$here/run_mpi.sh" "$@"
}
# In the background, waited for: a signal reaches the traps at once.
in_background() {
  "$@" &
  child=$!
  wait "$child"
  rc=$?
  child=""
  return $rc
}

# First, where the ranks landed: rank r on host-a when r is even, host-b when odd (--map-by node),
# each host's ranks in its own namespace, none in this (the root) one.
root_ns=$(readlink /proc/self/ns/net)
limit=60
in_background on_host_a "$np" /bin/sh -c \
  'echo "placement $OMPI_COMM_WORLD_RANK $(hostname) $(readlink /proc/self/ns/net)"' >"$tmp/placement" 2>&1
if ! why=$(awk -v np="$np" -v root="$root_ns" '
  $1 == "placement" { seen++; host[$2] = $3; ns[$2] = $4 }
  END {
    if (seen != np) { print "expected " np " ranks to report, " seen + 0 " did"; exit 1 }
    for (r = 0; r < np; r++) {
      want = r % 2 == 0 ? "host-a" : "host-b"
      if (host[r] != want) { print "rank " r " ran on " host[r] ", expected " want; exit 1 }
      if (ns[r] == root) { print "rank " r " ran in the root network namespace"; exit 1 }
      if (want == "host-a") { if (a != "" && a != ns[r]) { print "host-a ranks in two namespaces"; exit 1 }; a = ns[r] }
      else { if (b != "" && b != ns[r]) { print "host-b ranks in two namespaces"; exit 1 }; b = ns[r] }
    }
    if (a == b) { print "both hosts ran in one network namespace " a; exit 1 }
    print "host-a " a ", host-b " b ", this shell " root
  }' "$tmp/placement"); then
  echo "multihost: the ranks did not land one host per namespace: $why" >&2
  cat "$tmp/placement" >&2
  exit 1
fi
echo "multihost: placement checked: $why"
limit=${MLS_MPI_TIMEOUT:-280}

in_background on_host_a "$np" "$@"
rc=$?
# What crossed the cable (TCP only: every byte between the hosts went through it).
tx=$(ip netns exec "$nsa" cat "/sys/class/net/$veth_a/statistics/tx_bytes" 2>/dev/null)
rx=$(ip netns exec "$nsa" cat "/sys/class/net/$veth_a/statistics/rx_bytes" 2>/dev/null)
echo "multihost: host-a sent ${tx:-?} bytes to host-b and received ${rx:-?} bytes over the veth pair; mpirun exited with $rc"
exit $rc
