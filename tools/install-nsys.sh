#!/bin/bash
# Installs the Nsight Systems 2024.2.3 CLI (nsys, QdstrmImporter, export, stats, recipe) from
# Debian's non-free archive into a prefix, without touching the system's packages.
#   usage: tools/install-nsys.sh [PREFIX]     (default /opt/nsys-2024.2.3)
# tracediff finds it there (or via $TRACEDIFF_NSYS, or `nsys` on PATH).
# With NSYS_TARGET_ONLY=1 it only downloads the target deb (the part that profiles) into PREFIX,
# for carrying to a GPU machine with no network: `dpkg -x` it there.
set -euo pipefail
PREFIX=${1:-/opt/nsys-2024.2.3}
if [ -x "$PREFIX/bin/nsys" ] && [ "${NSYS_TARGET_ONLY:-0}" != 1 ]; then
  "$PREFIX/bin/nsys" --version; exit 0
fi
VER=2024.2.3.38~12.5.0-2+b1
LIBVER=0~~12.5.0-2+b1
SRC=/etc/apt/sources.list.d/debian.sources
if [ -f "$SRC" ]; then URI=$(awk '/^URIs:/{print $2; exit}' "$SRC"); else URI=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list); fi
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT; mkdir -p "$W/lists/partial"
echo "deb $URI experimental non-free" > "$W/sources.list"
o=(-o Dir::Etc::sourcelist="$W/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$W/lists" -o APT::Sandbox::User=root)
apt-get "${o[@]}" update -qq
mkdir -p "$PREFIX"
if [ "${NSYS_TARGET_ONLY:-0}" = 1 ]; then
  (cd "$PREFIX" && apt-get "${o[@]}" download -qq "nsight-systems-target=$VER")
  exit 0
fi
(cd "$W" && apt-get "${o[@]}" download -qq "nsight-systems=$VER" "nsight-systems-target=$VER" \
    "libarrow500=$LIBVER" "libparquet500=$LIBVER")
for f in "$W"/*.deb; do dpkg -x "$f" "$PREFIX"; done
# the target binary looks for the importer beside itself; Debian splits host and target apart
ln -sfn ../../nsight-systems/host-linux-x64 "$PREFIX/usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64"
# `nsys stats` runs host-side report scripts that import modules Debian ships on the target side
TGT="$PREFIX/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
HST="$PREFIX/usr/lib/nsight-systems/host-linux-x64"
for m in nsysstats.py gpustats.py nsys_client.py; do
  [ -e "$HST/python/lib/$m" ] || ln -s "$TGT/python/lib/$m" "$HST/python/lib/$m"
done
# `nsys recipe` looks for these; Debian strips them. Recipes whose SQL uses NVIDIA's own SQLite
# functions (median, rtree_scale) still fail with this build; `nsys stats` reports work.
mkdir -p "$TGT/python/packages/nsys_recipe/third_party"
ln -sf /usr/lib/x86_64-linux-gnu/libsqlite3.so.0 "$TGT/libsqlite3.so.0"
# libssh from Debian main; the CLI asks for the unversioned name
dpkg -s libssh-4 >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libssh-4 >/dev/null; }
ln -sf /usr/lib/x86_64-linux-gnu/libssh.so.4 "$PREFIX/usr/lib/x86_64-linux-gnu/libssh.so"
mkdir -p "$PREFIX/bin"
for tool in nsys QdstrmImporter; do
  case $tool in
    nsys) exe="$TGT/nsys" ;;
    QdstrmImporter) exe="$HST/QdstrmImporter" ;;
  esac
  cat > "$PREFIX/bin/$tool" <<EOS
#!/bin/sh
export LD_LIBRARY_PATH="$PREFIX/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$exe" "\$@"
EOS
  chmod +x "$PREFIX/bin/$tool"
done
"$PREFIX/bin/nsys" --version
