#!/usr/bin/env bash
# Installs the third-party xDS clients used by integration/clients_test.go,
# without touching the system beyond apt's package lists:
#   - Node: @grpc/grpc-js-xds via `npm ci` in integration/node (node_modules/).
#   - Python: Debian's python3-grpcio (C-core) and the libraries it needs that
#     are not installed, fetched with `apt-get download` and unpacked with
#     `dpkg-deb -x` into integration/python/.deb/ (gitignored).
# Idempotent: a second run with everything in place takes well under a second.
# Usage: .ci/install-clients.sh [node] [python]   (default: both)
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD

log() { printf 'install-clients: %s\n' "$*" >&2; }

install_node() {
	local dir=$root/integration/node
	if ! command -v npm >/dev/null 2>&1; then
		log "npm not found; install Node.js >= 18 and npm"
		return 1
	fi
	# npm ci rewrites node_modules; skip it when the lock file is unchanged.
	local stamp=$dir/node_modules/.xds-relay-lock.sha256
	local sum
	sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	if [[ -f $stamp && $(cat "$stamp") == "$sum" && -d $dir/node_modules/@grpc/grpc-js-xds ]]; then
		log "node client up to date"
		return 0
	fi
	log "npm ci in integration/node"
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
	echo "$sum" >"$stamp"
}

installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'
}

# missing_debs prints python3-grpcio and, recursively, every dependency that
# is not installed on this machine (virtual packages are skipped).
missing_debs() {
	local -a queue=(python3-grpcio)
	local -A seen=()
	local p d
	while ((${#queue[@]})); do
		p=${queue[0]}
		queue=("${queue[@]:1}")
		[[ -n ${seen[$p]:-} ]] && continue
		seen[$p]=1
		if [[ $p != python3-grpcio ]] && installed "$p"; then
			continue
		fi
		echo "$p"
		while read -r d; do
			queue+=("$d")
		done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts \
			--no-breaks --no-replaces --no-enhances "$p" |
			awk '$1 ~ /Depends:$/ && $2 !~ /^</ {print $2}' | sed 's/:any$//')
	done
}

install_python() {
	local dest=$root/integration/python/.deb
	local stamp=$dest/.installed
	if [[ -f $stamp ]] && PYTHONPATH=$dest/usr/lib/python3/dist-packages \
		LD_LIBRARY_PATH=$dest/usr/lib/x86_64-linux-gnu:$dest/usr/lib \
		/usr/bin/python3 -c 'import grpc' >/dev/null 2>&1; then
		log "python client up to date ($(cat "$stamp"))"
		return 0
	fi
	for tool in apt-get apt-cache dpkg-deb dpkg-query /usr/bin/python3; do
		if ! command -v "$tool" >/dev/null 2>&1; then
			log "$tool not found; the Python client needs a Debian (bookworm) machine"
			return 1
		fi
	done
	# A fresh machine has no package lists: fetch them once.
	if ! apt-cache show python3-grpcio >/dev/null 2>&1; then
		log "apt-get update"
		apt-get update -qq
	fi
	local -a pkgs
	mapfile -t pkgs < <(missing_debs)
	log "downloading ${pkgs[*]}"
	local tmp
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	# Stale package lists give 404s: refresh them and try once more.
	local -a dl=(apt-get download -qq)
	# As root, apt would warn that its _apt sandbox user cannot write to $tmp.
	((EUID)) || dl+=(-o APT::Sandbox::User=root)
	if ! (cd "$tmp" && "${dl[@]}" "${pkgs[@]}"); then
		log "download failed; apt-get update and retry"
		apt-get update -qq
		(cd "$tmp" && "${dl[@]}" "${pkgs[@]}")
	fi
	rm -rf "$dest"
	mkdir -p "$dest"
	local deb
	for deb in "$tmp"/*.deb; do
		dpkg-deb -x "$deb" "$dest"
	done
	PYTHONPATH=$dest/usr/lib/python3/dist-packages \
		LD_LIBRARY_PATH=$dest/usr/lib/x86_64-linux-gnu:$dest/usr/lib \
		/usr/bin/python3 -c 'import grpc; print(grpc.__version__)' >"$stamp"
	log "python client installed in integration/python/.deb (grpcio $(cat "$stamp"))"
}

what=("$@")
((${#what[@]})) || what=(node python)
for w in "${what[@]}"; do
	case $w in
	node) install_node ;;
	python) install_python ;;
	*)
		log "unknown client $w (want node or python)"
		exit 2
		;;
	esac
done
