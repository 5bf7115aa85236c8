# tools/fa4_unpack.sh: sourced on the GPU machine from the repository root after tools/fa4_pack.sh's two parts
# arrived (.cache/fa4_1 in an earlier call on the same warm machine, .cache/fa4_2 in this one): joins and checks
# them, unpacks FlashAttention-4 into ${FA4_DIR:-/tmp/fa4} once, and puts it on PYTHONPATH, so that
# `flashtune peers ... --peers fa4` (python/flashtune/peers.py) imports flash_attn.cute. One line and status 1
# when a part is missing or does not match (a cold machine lost part one: carry it again, then this call's).
fa4_unpack() {
  local dir=${FA4_DIR:-/tmp/fa4}
  local p1 p2
  p1=$(ls .cache/fa4_1/fa4.part.* 2>/dev/null | head -1)
  p2=$(ls .cache/fa4_2/fa4.part.* 2>/dev/null | head -1)
  if [ ! -f "$dir/flash_attn/cute/interface.py" ]; then
    [ -n "$p1" ] || { echo "fa4_unpack: .cache/fa4_1 part missing (the machine was not warm since the call that carried it)" >&2; return 1; }
    [ -n "$p2" ] || { echo "fa4_unpack: .cache/fa4_2 part missing (carry it in this call)" >&2; return 1; }
    local joined=/tmp/fa4.tar.xz
    cat "$p1" "$p2" > "$joined"
    if [ -f .cache/fa4_2/SHA256 ] && [ "$(sha256sum "$joined" | awk '{print $1}')" != "$(cat .cache/fa4_2/SHA256)" ]; then
      echo "fa4_unpack: the joined parts do not match tools/fa4_pack.sh's checksum (parts of two different packs?)" >&2
      return 1
    fi
    mkdir -p "$dir" && tar xJf "$joined" -C "$dir" && rm -f "$joined" || { echo "fa4_unpack: unpacking into $dir failed" >&2; return 1; }
  fi
  export PYTHONPATH="$dir:$dir/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
  echo "fa4_unpack: flash-attn-4 from $dir on PYTHONPATH ($(cat .cache/fa4_1/VERSION 2>/dev/null || echo 'version unknown'))"
}
fa4_unpack
