#!/usr/bin/env bash
# Per-user install of the Linux bundle: no root needed.
#   ./install_linux.sh [path/to/InvariantAttentionStudio]   (default: the folder beside this script,
#                                                            or ./dist/InvariantAttentionStudio)
#   ./install_linux.sh --uninstall
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="${XDG_DATA_HOME:-$HOME/.local/share}"
opt="$HOME/.local/opt/InvariantAttentionStudio"
bin="$HOME/.local/bin"

if [ "${1:-}" = "--uninstall" ]; then
  rm -rf "$opt" "$bin/ia-studio" "$prefix/applications/ia-studio.desktop" \
         "$prefix/icons/hicolor/256x256/apps/ia-studio.png"
  echo "Invariant Attention Studio removed."
  exit 0
fi

src="${1:-}"
if [ -z "$src" ]; then
  for cand in "$here" "$here/InvariantAttentionStudio" "$here/../dist/InvariantAttentionStudio" "./dist/InvariantAttentionStudio"; do
    [ -x "$cand/ia-studio" ] && src="$cand" && break
  done
fi
if [ -z "$src" ] || [ ! -x "$src/ia-studio" ]; then
  echo "Cannot find the InvariantAttentionStudio folder (with the ia-studio program inside)." >&2
  echo "Give its path: $0 /path/to/InvariantAttentionStudio" >&2
  exit 1
fi
icon="$src/_internal/resources/icons/ia-studio.png"
desktop="$here/../resources/linux/ia-studio.desktop"
[ -f "$desktop" ] || desktop="$src/_internal/resources/linux/ia-studio.desktop"

mkdir -p "$opt" "$bin" "$prefix/applications" "$prefix/icons/hicolor/256x256/apps"
rm -rf "$opt"
cp -a "$src" "$opt"
ln -sf "$opt/ia-studio" "$bin/ia-studio"
[ -f "$icon" ] && cp "$icon" "$prefix/icons/hicolor/256x256/apps/ia-studio.png"
sed "s|^Exec=.*|Exec=$opt/ia-studio %F|" "$desktop" > "$prefix/applications/ia-studio.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$prefix/applications" || true
echo "Installed to $opt; start it from your applications menu or with: $bin/ia-studio"
