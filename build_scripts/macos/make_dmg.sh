#!/usr/bin/env bash
# Make a drag-to-Applications DMG from the .app that build.py produces on macOS.
#   python build_scripts/build.py && bash build_scripts/macos/make_dmg.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
app="$root/dist/Invariant Attention Studio.app"
version="$(python -c 'import sys; sys.path.insert(0, "'"$root"'"); from core import __version__; print(__version__)')"
arch="$(uname -m)"
out="$root/dist/InvariantAttentionStudio-$version-macos-$arch.dmg"
[ -d "$app" ] || { echo "No $app: run python build_scripts/build.py on macOS first." >&2; exit 1; }
stage="$(mktemp -d)"
cp -R "$app" "$stage/"
ln -s /Applications "$stage/Applications"
rm -f "$out"
hdiutil create -volname "Invariant Attention Studio" -srcfolder "$stage" -ov -format UDZO "$out"
rm -rf "$stage"
echo "Wrote $out (unsigned: on first launch, right-click the app and choose Open)."
