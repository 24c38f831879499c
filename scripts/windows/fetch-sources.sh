#!/usr/bin/env bash
# Fetches Debian 12's own source packages of the compiled libraries vkspec links (sentencepiece, pcre2) for
# the Windows cross build, into $1 (default build-win-deps/src). The deb-src entry is derived from this machine's
# apt sources (the same archive, Types: deb-src), so no host is named here.
set -euo pipefail
dest=${1:-build-win-deps/src}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! apt-get source --print-uris -qq sentencepiece >/dev/null 2>&1; then
  src=/etc/apt/sources.list.d/vkspec-deb-src.sources
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then   # deb822 (Debian 12's default)
    sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources | $SUDO tee $src >/dev/null
  else                                                      # one-line style
    grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | grep -i debian |
      sed 's/^deb /deb-src /' | $SUDO tee /etc/apt/sources.list.d/vkspec-deb-src.list >/dev/null
  fi
  $SUDO apt-get update -qq
fi
mkdir -p "$dest"
cd "$dest"
for p in sentencepiece pcre2; do
  if ! ls -d "$p"-*/ >/dev/null 2>&1; then
    # newest version first; a security update's source can be missing from a snapshot mirror
    for v in $(apt-cache showsrc "$p" | awk '/^Version:/ {print $2}' | sort -rV); do
      apt-get source -qq --download-only "$p=$v" >/dev/null 2>&1 && break
      rm -f "$p"_*.dsc
    done
    dpkg-source -x "$(ls "$p"_*.dsc | head -1)" >/dev/null 2>&1
  fi
done
ls -d */
