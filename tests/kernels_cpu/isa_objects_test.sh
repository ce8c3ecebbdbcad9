#!/bin/sh
# The x86 kernel files (*_avx2.cc, *_avxvnni.cc, *_avx512.cc, *_amx.cc) are compiled for
# instruction sets the host may lack, and the rest of the program reaches them only after isa.cc has checked CPUID.
# So they must define no symbol the linker could pick for other callers: no weak or unique
# symbols (an inline function or template instantiated there would be a copy compiled for that
# set) and no globals beyond their entry points gem::cpu::detail::avx2_* / avxvnni_* /
# avx512_* / amx_*.
# DW.ref.__gxx_personality_v0 (the exception personality's address, data the compiler emits
# weak in any file with unwinding tables, e.g. under the sanitizers) is no code and is allowed.
#   isa_objects_test.sh libgem_backend_cpu.a
set -eu
lib=$1
bad=$(nm -A -C --defined-only "$lib" 2>/dev/null |
  grep -E '_(avx2|avxvnni|avx512|amx)\.cc\.o:' | grep -v 'DW\.ref\.__gxx_personality_v0$' |
  awk '{ type = $2; if (NF < 3) type = $(NF - 1) }
       type ~ /^[WVuiv]$/ { print; next }
       type ~ /^[A-Z]$/ && $0 !~ /gem::cpu::detail::(avx2|avxvnni|avx512|amx)_/ { print }' || true)
members=$(nm -A --defined-only "$lib" 2>/dev/null | grep -cE '_(avx2|avxvnni|avx512|amx)\.cc\.o:' || true)
if [ -n "$bad" ]; then
  echo "symbols the linker could share out of the ISA kernel files:"
  echo "$bad"
  exit 1
fi
echo "ISA kernel files: $members defined symbols, none shared beyond the entry points"
