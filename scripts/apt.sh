# Sourced by the setup scripts: apt_install_missing TAG PACKAGE... installs the Debian
# packages that are not installed yet (apt is skipped when all are present).
apt_install_missing() {
  local tag=$1
  shift
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "$tag: all $# packages present"
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "$tag: run as root or install sudo" >&2; return 1; }
    sudo="sudo"
  fi
  echo "$tag: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}
