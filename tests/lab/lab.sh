#!/usr/bin/env bash
# The lab: Debian systemd containers (rootful podman) that stand in for the cluster's hosts.
# One implementation for `make lab-*`, `make demo` and every molecule scenario
# (.config/molecule/config.yml uses the images built here).
#
#   lab.sh setup                 install podman/runc/debootstrap if missing, write containers.conf
#   lab.sh image SUITE [ARCH]    build localhost/llmops-lab:SUITE[-ARCH] if its recipe changed
#   lab.sh images                bookworm and trixie (amd64)
#   lab.sh up [NAME[@SUITE[/ARCH]][=ADDRESS[,FABRIC_ADDRESS]]...]
#                                start hosts (default: LAB_HOSTS, the shape of inventories/lab) on
#                                network llmops-lab, at ADDRESS; with FABRIC_ADDRESS also on the fabric
#                                network (LAB_NETWORK-fabric, the stand-in for the ConnectX-7 fabric)
#   lab.sh down [NAME...]        remove hosts (default: all on LAB_NETWORK) and the network when empty
#   lab.sh status                list lab hosts
#
# Environment: LAB_SUITE (bookworm), LAB_NETWORK (llmops-lab), LAB_SUBNET (10.89.40.0/24: a podman
# network this run creates; nothing outside it is contacted), LAB_FABRIC_NETWORK (LAB_NETWORK-fabric;
# its /24 is the fabric addresses'; internal: no route out), LAB_DNS (0: the networks resolve no
# names, as a real cluster's hosts need not resolve each other: every address comes from the
# inventory; 1 for the scenarios that reach hosts by name), LAB_DEBIAN_MIRROR, LAB_HOSTS,
# LAB_PREFIX (container-name prefix, molecule uses the scenario's), LAB_EXTRA_OPTS (podman run options),
# LAB_SSH (1: `up` starts sshd on each host and writes $LAB_SSH_DIR/$LAB_NETWORK.config, an ssh_config
# with each host's address, the lab's key and its host keys, for inventories/lab; molecule sets 0 and
# uses podman exec). SSH is how a real cluster is reached, and with pipelining and a persistent
# connection a task costs a fraction of what a podman exec connection costs (docs/upgrades.md).
set -euo pipefail

LAB_SUITE=${LAB_SUITE:-bookworm}
LAB_NETWORK=${LAB_NETWORK:-llmops-lab}
LAB_SUBNET=${LAB_SUBNET:-10.89.40.0/24}
LAB_DEBIAN_MIRROR=${LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# inventories/lab: two replicas, each a head and a worker meeting on the fabric (ansible_host and
# vllm_service_advertise_address there are these addresses).
LAB_HOSTS=${LAB_HOSTS:-dgx1=10.89.40.11,10.89.41.11 dgx2=10.89.40.12,10.89.41.12 dgx3=10.89.40.13,10.89.41.13 dgx4=10.89.40.14,10.89.41.14 lb1=10.89.40.10 lb2=10.89.40.20}
LAB_FABRIC_NETWORK=${LAB_FABRIC_NETWORK:-$LAB_NETWORK-fabric}
LAB_DNS=${LAB_DNS:-0}
LAB_IMAGE_REPO=${LAB_IMAGE_REPO:-localhost/llmops-lab}
LAB_PREFIX=${LAB_PREFIX:-}
LAB_EXTRA_OPTS=${LAB_EXTRA_OPTS:-}
# vLLM's API and engine processes share a ~160 MiB ring buffer in /dev/shm; podman's default is 64 MiB.
LAB_SHM_SIZE=${LAB_SHM_SIZE:-1g}
# Host-side cache shared by lab runs (wheelhouse, tiny model, local git/apt stand-ins). Mounted
# read-only into every lab host at /srv/llmops-lab: the stand-in for a site's internal mirror.
LAB_CACHE=${LAB_CACHE:-/var/cache/llmops-lab}
LAB_CONTAINERS_CONF=${LAB_CONTAINERS_CONF:-/etc/containers/containers.conf}
# Packages every lab image carries (the recipe: changing it rebuilds the images).
LAB_PACKAGES="systemd,systemd-sysv,dbus,python3,python3-apt,sudo,iproute2,iputils-ping,ca-certificates,procps,gnupg,curl,less,openssh-server"
LAB_SSH=${LAB_SSH:-1}
LAB_SSH_DIR=${LAB_SSH_DIR:-/var/lib/llmops-lab/ssh}
# What a lab host may do: systemd sandboxing needs mount namespaces (SYS_ADMIN), the network role
# configures addresses (NET_ADMIN), ping needs NET_RAW.
LAB_CAPS=${LAB_CAPS:-SYS_ADMIN,NET_ADMIN,NET_RAW}

log() { printf '[lab] %s\n' "$*" >&2; }
die() { printf '[lab] ERROR: %s\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "the lab uses rootful podman: run as root"; }

setup() {
  need_root
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  # apt-ftparchive indexes the stand-in apt repositories (tests/lab/standins/nvidia_apt_repos.sh).
  command -v apt-ftparchive >/dev/null || missing+=(apt-utils)
  command -v aardvark-dns >/dev/null || [ -x /usr/lib/podman/aardvark-dns ] || missing+=(aardvark-dns)
  [ -x /usr/lib/podman/netavark ] || command -v netavark >/dev/null || missing+=(netavark)
  # netavark programs the podman network's NAT with iptables; without it: "netavark: No such file".
  command -v iptables >/dev/null || missing+=(iptables)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # crun 1.8 refuses this machine's hybrid cgroup layout; nproc above 32768 fails (docs/troubleshooting.md).
  local want
  want=$(cat <<'CONF'
# Written by llmops.vllm_cluster tests/lab/lab.sh: what rootful podman needs on this machine.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
CONF
)
  if [ ! -f "$LAB_CONTAINERS_CONF" ] || [ "$(cat "$LAB_CONTAINERS_CONF")" != "$want" ]; then
    mkdir -p "$(dirname "$LAB_CONTAINERS_CONF")"
    if [ -f "$LAB_CONTAINERS_CONF" ] && ! grep -q 'llmops.vllm_cluster' "$LAB_CONTAINERS_CONF"; then
      cp -a "$LAB_CONTAINERS_CONF" "$LAB_CONTAINERS_CONF.before-llmops-lab"
      log "kept the previous $LAB_CONTAINERS_CONF as $LAB_CONTAINERS_CONF.before-llmops-lab"
    fi
    printf '%s\n' "$want" > "$LAB_CONTAINERS_CONF"
    log "wrote $LAB_CONTAINERS_CONF"
  fi
}

arch_setup() {
  # Run arm64 (DGX Spark's architecture) userlands under qemu-user emulation.
  local arch=$1
  [ "$arch" = amd64 ] && return 0
  [ "$arch" = arm64 ] || die "unsupported lab architecture '$arch' (valid: amd64, arm64)"
  command -v qemu-aarch64-static >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null
  }
  mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    # Register with the F (fix binary) flag so containers find the interpreter.
    # Keep Debian's flags (P is needed by its interpreter wrapper) and add F (fix binary) so
    # containers find the interpreter.
    local line
    line=$(cat /usr/lib/binfmt.d/qemu-aarch64.conf)
    case ${line##*:} in *F*) ;; *) line="${line}F" ;; esac
    printf '%s\n' "$line" > /proc/sys/fs/binfmt_misc/register
  fi
}

recipe_hash() {
  local suite=$1 arch=$2
  { printf '%s\n' "$suite" "$arch" "$LAB_PACKAGES" "$LAB_DEBIAN_MIRROR"; declare -f build_image; } | sha256sum | cut -c1-16
}

image_name() {
  local suite=$1 arch=${2:-amd64}
  if [ "$arch" = amd64 ]; then echo "$LAB_IMAGE_REPO:$suite"; else echo "$LAB_IMAGE_REPO:$suite-$arch"; fi
}

build_image() {
  local suite=$1 arch=$2 name=$3 hash=$4 root
  root=$(mktemp -d "${TMPDIR:-/tmp}/llmops-lab-root.XXXXXX")
  log "debootstrap $suite/$arch (cold build, about a minute)"
  debootstrap --variant=minbase --arch="$arch" --include="$LAB_PACKAGES" "$suite" "$root" "$LAB_DEBIAN_MIRROR" \
    > "$root.log" 2>&1 || { tail -20 "$root.log" >&2; rm -rf "$root"; die "debootstrap $suite/$arch failed (log above)"; }
  rm -f "$root.log"
  # A container boots straight to multi-user; nothing to log in to, no getty.
  chroot "$root" systemctl mask getty.target console-getty.service systemd-firstboot.service \
    systemd-udevd.service systemd-modules-load.service >/dev/null 2>&1 || true
  # sshd off until `up` gives the host keys of its own (LAB_SSH=1): no host shares a host key.
  chroot "$root" systemctl disable ssh.service ssh.socket >/dev/null 2>&1 || true
  rm -f "$root"/etc/ssh/ssh_host_*
  # Leave apt clean and the image small.
  # Leave no package lists: an apt cache_valid_time check must see them as old and update.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  mkdir -p "$root"/var/lib/apt/lists/partial
  touch -d '2000-01-01' "$root"/var/lib/apt/lists
  echo "llmops-lab" > "$root/etc/hostname"
  tar -C "$root" -c . | podman import --arch "$arch" \
    --change 'CMD ["/lib/systemd/systemd"]' \
    --change 'ENV container=podman' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL llmops.lab.recipe=$hash" \
    - "$name" >/dev/null 2>&1 || { rm -rf "$root"; die "podman import of $name failed"; }
  rm -rf "$root"
}

image() {
  need_root
  local suite=${1:-$LAB_SUITE} arch=${2:-amd64} name hash have
  arch_setup "$arch"
  name=$(image_name "$suite" "$arch")
  hash=$(recipe_hash "$suite" "$arch")
  have=$(podman image inspect --format '{{ index .Labels "llmops.lab.recipe" }}' "$name" 2>/dev/null || true)
  if [ "$have" = "$hash" ]; then
    log "image $name is current (recipe $hash)"
    return 0
  fi
  local t0=$SECONDS
  build_image "$suite" "$arch" "$name" "$hash"
  log "built $name (recipe $hash) in $((SECONDS - t0)) s"
}

# A podman network with DNS as LAB_DNS says; one left with the other setting is made again when
# no host is on it.
network() {
  local name=$1 subnet=$2 opts=() want have
  shift 2
  want=true; [ "$LAB_DNS" = 1 ] || { want=false; opts+=(--disable-dns); }
  if podman network exists "$name"; then
    have=$(podman network inspect --format '{{.DNSEnabled}}' "$name")
    [ "$have" != "$want" ] || return 0
    [ -z "$(podman ps -a --filter network="$name" --format '{{.Names}}')" ] ||
      die "network $name has DNS $have, LAB_DNS=$LAB_DNS wants $want, and hosts are on it: lab.sh down first"
    podman network rm "$name" >/dev/null
  fi
  podman network create --subnet "$subnet" "${opts[@]}" "$@" --label llmops.lab=1 "$name" >/dev/null
}

# A fixed address per host, like a real cluster's: a host stopped and started again (the fault tests
# do it) comes back on the same address, so the balancer and the firewall rules still point at it.
# The first free one from .10 of a /24 LAB_SUBNET (another subnet: podman's dynamic addresses).
free_address() {
  [[ "$LAB_SUBNET" =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.0/24$ ]] || return 0
  local base=${BASH_REMATCH[1]} used n
  used=" $(podman ps -a --filter "label=llmops.lab.network=$LAB_NETWORK" --format '{{index .Labels "llmops.lab.ip"}}' | tr '\n' ' ') "
  used+=" $(podman ps --filter "network=$LAB_NETWORK" --format '{{.Names}}' | xargs -r podman inspect \
    --format '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' | tr '\n' ' ') "
  for n in $(seq 10 250); do
    case "$used" in *" $base.$n "*) ;; *) echo "$base.$n"; return 0 ;; esac
  done
}

mac_for() {
  local IFS=. o
  read -r -a o <<< "$1"
  printf '02:6c:%02x:%02x:%02x:%02x\n' "${o[0]}" "${o[1]}" "${o[2]}" "${o[3]}"
}

up() {
  # Each argument: NAME[@SUITE[/ARCH]], e.g. dgx1, lb1@trixie, spark1@bookworm/arm64.
  # The container is named $LAB_PREFIX$NAME and answers to NAME on the lab network.
  setup
  network "$LAB_NETWORK" "$LAB_SUBNET"
  local specs=("$@") spec h suite arch names=() want_ip fabric_ip
  [ ${#specs[@]} -gt 0 ] || read -r -a specs <<< "$LAB_HOSTS"
  for spec in "${specs[@]}"; do
    want_ip=""; fabric_ip=""
    if [ "$spec" != "${spec%%=*}" ]; then
      want_ip=${spec#*=}; spec=${spec%%=*}
      [ "$want_ip" = "${want_ip%%,*}" ] || { fabric_ip=${want_ip#*,}; want_ip=${want_ip%%,*}; }
    fi
    h=${spec%%@*}; suite=$LAB_SUITE; arch=amd64
    if [ "$spec" != "$h" ]; then suite=${spec#*@}; arch=amd64; [ "$suite" = "${suite%/*}" ] || { arch=${suite#*/}; suite=${suite%/*}; }; fi
    [[ "$h" =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "host name '$h' must be lower-case letters, digits and '-'"
    image "$suite" "$arch"
    names+=("$LAB_PREFIX$h")
    if podman container exists "$LAB_PREFIX$h"; then
      [ "$(podman inspect --format '{{.State.Running}}' "$LAB_PREFIX$h")" = true ] || podman start "$LAB_PREFIX$h" >/dev/null
      continue
    fi
    local platform=() ip net nets=() alias=""
    [ "$arch" = amd64 ] || platform=(--arch "$arch")
    ip=${want_ip:-$(free_address)}
    # The MAC too: a new one on the same address leaves the peers' neighbour entries pointing at
    # the old MAC (they stay REACHABLE while the peer retries), so the host would be unreachable
    # from them after a restart. Locally administered, derived from the address.
    [ "$LAB_DNS" != 1 ] || alias=",alias=$h"
    net="$LAB_NETWORK:interface_name=eth0$alias"
    [ -z "$ip" ] || net+=",ip=$ip,mac=$(mac_for "$ip")"
    nets=(--network "$net" --label "llmops.lab.ip=$ip")
    if [ -n "$fabric_ip" ]; then
      [[ "$fabric_ip" =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.[0-9]+$ ]] || die "fabric address '$fabric_ip' of $h is not an IPv4 address"
      network "$LAB_FABRIC_NETWORK" "${BASH_REMATCH[1]}.0/24" --internal
      nets+=(--network "$LAB_FABRIC_NETWORK:interface_name=eth1,ip=$fabric_ip,mac=$(mac_for "$fabric_ip")"
             --label "llmops.lab.fabric_ip=$fabric_ip")
    fi
    mkdir -p "$LAB_CACHE"
    # --restart=always: a reboot inside the host (its init exits) starts it again, as a real
    # host comes back from a reboot; podman kill and stop (power pulled, lab down) do not.
    podman run -d --name "$LAB_PREFIX$h" --hostname "$h" "${nets[@]}" \
      --label llmops.lab=1 --label "llmops.lab.network=$LAB_NETWORK" --systemd=always --restart=always --cap-add "$LAB_CAPS" \
      --tmpfs /tmp --tmpfs /run --tmpfs /run/lock -v "$LAB_CACHE:/srv/llmops-lab:ro" --shm-size "$LAB_SHM_SIZE" "${platform[@]}" $LAB_EXTRA_OPTS \
      "$(image_name "$suite" "$arch")" >/dev/null
  done
  for h in "${names[@]}"; do wait_booted "$h"; done
  [ "$LAB_SSH" != 1 ] || ssh_access "${names[@]}"
  log "up: ${names[*]} on $LAB_NETWORK ($LAB_SUBNET)"
}

# sshd on each host with host keys of its own, root's authorized key the lab's, then an ssh_config
# for every SSH host on the network: HostName (its fixed address), the key, a known_hosts file with
# the hosts' real keys (StrictHostKeyChecking yes), a persistent connection.
ssh_access() {
  local h key=$LAB_SSH_DIR/id_ed25519
  mkdir -p "$LAB_SSH_DIR" && chmod 700 "$LAB_SSH_DIR"
  [ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -C llmops-lab -f "$key"
  for h in "$@"; do
    podman exec -i "$h" bash -c 'set -e
      ls /etc/ssh/ssh_host_*_key >/dev/null 2>&1 || ssh-keygen -A >/dev/null
      install -d -m 700 /root/.ssh && cat > /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys
      systemctl enable --now ssh.service >/dev/null 2>&1' < "$key.pub" || die "could not start sshd on $h"
    podman exec "$h" systemctl is-active --quiet ssh.service || die "sshd is not running on $h"
  done
  ssh_config
}

ssh_config() {
  local conf=$LAB_SSH_DIR/$LAB_NETWORK.config known=$LAB_SSH_DIR/$LAB_NETWORK.known_hosts c h ip n=0
  [ -d "$LAB_SSH_DIR" ] || return 0
  : > "$conf.new"; : > "$known.new"
  printf '# Written by tests/lab/lab.sh for the lab hosts on podman network %s.\n' "$LAB_NETWORK" >> "$conf.new"
  for c in $(podman ps --filter "label=llmops.lab.network=$LAB_NETWORK" --format '{{.Names}}'); do
    podman exec "$c" systemctl is-active --quiet ssh.service 2>/dev/null || continue
    h=$(podman inspect --format '{{.Config.Hostname}}' "$c")
    ip=$(podman inspect --format "{{(index .NetworkSettings.Networks \"$LAB_NETWORK\").IPAddress}}" "$c")
    # By name and by address: the inventory's ansible_host is the address.
    printf 'Host %s %s\n  HostName %s\n' "$h" "$ip" "$ip" >> "$conf.new"; n=$((n + 1))
    podman exec "$c" cat /etc/ssh/ssh_host_ed25519_key.pub | awk -v n="$h,$ip" '{print n, $1, $2}' >> "$known.new"
  done
  cat >> "$conf.new" <<CONF
Host *
  User root
  IdentityFile $LAB_SSH_DIR/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $known
  StrictHostKeyChecking yes
  ControlMaster auto
  ControlPath $LAB_SSH_DIR/cm-%C
  ControlPersist 120s
CONF
  if [ "$n" = 0 ]; then rm -f "$conf" "$known" "$conf.new" "$known.new"; return 0; fi
  mv "$known.new" "$known"; mv "$conf.new" "$conf"
}

wait_booted() {
  local h=$1 state i
  for i in $(seq 1 60); do
    state=$(podman exec "$h" systemctl is-system-running 2>/dev/null || true)
    case "$state" in running|degraded) return 0 ;; esac
    sleep 1
  done
  die "$h did not finish booting (systemctl is-system-running: ${state:-no answer})"
}

down() {
  local hosts=("$@")
  if [ ${#hosts[@]} -eq 0 ]; then
    mapfile -t hosts < <(podman ps -a --filter "label=llmops.lab.network=$LAB_NETWORK" --format '{{.Names}}')
  fi
  local i
  for i in "${!hosts[@]}"; do hosts[$i]=$LAB_PREFIX${hosts[$i]#"$LAB_PREFIX"}; done
  [ ${#hosts[@]} -eq 0 ] || podman rm -f -t 5 "${hosts[@]}" >/dev/null
  ssh_config
  local net
  for net in "$LAB_NETWORK" "$LAB_FABRIC_NETWORK"; do
    if podman network exists "$net" && [ -z "$(podman ps -a --filter network="$net" --format '{{.Names}}')" ]; then
      podman network rm "$net" >/dev/null
    fi
  done
  log "down: ${hosts[*]:-nothing was up}"
}

status() { podman ps -a --filter label=llmops.lab=1 --format 'table {{.Names}}\t{{.Status}}\t{{.Image}}'; }

cmd=${1:-}; shift || true
# Several jobs (a CI run, molecule scenarios, the demo) may prepare the lab at once: one at a time.
case "$cmd" in setup|image|images) exec 8>/run/llmops-lab.lock; flock 8 ;; esac
case "$cmd" in
  setup) setup ;;
  image) setup; image "$@" ;;
  images) setup; image bookworm; image trixie ;;
  up) up "$@" ;;
  down) down "$@" ;;
  status) status ;;
  *) sed -n '2,/^set -euo pipefail/{/^set -euo/!p}' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
