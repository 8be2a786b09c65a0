#!/usr/bin/env bash
# The Debian packages the pipeline uses beyond the venv, installed where this user may install them.
#
#   python3-simgrid     SimGrid's Python module: the papers' scale (simulate-validate, simulate-scale);
#                       scalerepro finds it in /usr/lib/python3/dist-packages from the venv
#   libjpeg-turbo-progs jpegtran: `scalerepro shard` indexes each JPEG's rows, so the loader decodes
#                       only the rows a crop needs (without it, whole images)
#   chromium            a headless browser: the tests open results/report.html in it as its reader
#                       would (tests/browser.py); the pipeline runs without it (measured here: 112 MB
#                       fetched, installed in about 40 s)
#
# As root, or with passwordless sudo, a missing package is installed with apt-get (measured here, both
# removed and apt's cache emptied, package lists present: 4 s; the lists are refreshed first only if
# the install fails); otherwise the script
# says once what it could not install and the command that would, and exits 0: `make run` goes on
# without the simulation (simulate.enabled: auto).
set -uo pipefail

missing=()
/usr/bin/python3 -c 'import simgrid' 2>/dev/null || missing+=(python3-simgrid)
command -v jpegtran >/dev/null || missing+=(libjpeg-turbo-progs)
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "scalerepro: not installed (needs root): ${missing[*]}; run: sudo apt-get install ${missing[*]}" \
    "(then make run again adds the simulated rows)" >&2
  exit 0
fi
start=$(date +%s)
echo "scalerepro: installing ${missing[*]} (Debian packages)..." >&2
install() { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >&2; }
if ! install install -y -q "${missing[@]}" && ! { install update -q && install install -y -q "${missing[@]}"; }; then
  echo "scalerepro: apt-get could not install ${missing[*]}; the run goes on without them" >&2
  exit 0
fi
echo "scalerepro: installed ${missing[*]} in $(($(date +%s) - start)) s" >&2
