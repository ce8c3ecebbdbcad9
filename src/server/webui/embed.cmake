# Turns the chat page (src/server/webui/index.html) into a C++ header at build time:
#   cmake -DINPUT=index.html -DOUTPUT=index_html.h -P embed.cmake
# The header holds the page's bytes and its Content-Security-Policy, whose script-src and
# style-src name the SHA-256 of the page's one inline <script> and one inline <style>, so the
# browser runs exactly this page's code and nothing injected. No xxd, no Python: CMake only.
cmake_minimum_required(VERSION 3.16)
if(NOT INPUT OR NOT OUTPUT)
  message(FATAL_ERROR "embed.cmake: pass -DINPUT=<file> -DOUTPUT=<header>")
endif()

# base64 of a hex string (CSP hashes are base64 of the raw digest).
function(hex_to_base64 hex out)
  set(alphabet "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
  string(LENGTH "${hex}" n)
  set(result "")
  set(i 0)
  while(i LESS n)
    math(EXPR left "${n} - ${i}")
    set(take 6)
    set(keep 4)
    if(left LESS 6)
      set(take ${left})
    endif()
    string(SUBSTRING "${hex}" ${i} ${take} chunk)
    if(take EQUAL 2)
      set(chunk "${chunk}0000")
      set(keep 2)
    elseif(take EQUAL 4)
      set(chunk "${chunk}00")
      set(keep 3)
    endif()
    math(EXPR v "0x${chunk}")
    set(k 0)
    foreach(shift 18 12 6 0)
      if(k LESS keep)
        math(EXPR idx "(${v} >> ${shift}) & 63")
        string(SUBSTRING "${alphabet}" ${idx} 1 c)
        string(APPEND result "${c}")
      else()
        string(APPEND result "=")
      endif()
      math(EXPR k "${k} + 1")
    endforeach()
    math(EXPR i "${i} + 6")
  endwhile()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# 'sha256-...' of the text between the page's only <tag> and </tag>.
function(inline_hash content tag out)
  string(FIND "${content}" "<${tag}>" open)
  string(FIND "${content}" "</${tag}>" close)
  string(FIND "${content}" "<${tag}>" open_last REVERSE)
  if(open LESS 0 OR close LESS open OR NOT open EQUAL open_last)
    message(FATAL_ERROR "embed.cmake: ${INPUT} needs exactly one plain <${tag}> element")
  endif()
  string(LENGTH "<${tag}>" taglen)
  math(EXPR start "${open} + ${taglen}")
  math(EXPR len "${close} - ${start}")
  string(SUBSTRING "${content}" ${start} ${len} body)
  string(SHA256 digest "${body}")
  hex_to_base64("${digest}" b64)
  set(${out} "'sha256-${b64}'" PARENT_SCOPE)
endfunction()

file(READ "${INPUT}" content)
inline_hash("${content}" script script_hash)
inline_hash("${content}" style style_hash)
set(csp "default-src 'none'; script-src ${script_hash}; style-src ${style_hash}; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR nbytes "${nhex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# 16 bytes a line.
string(REPEAT "0x[0-9a-f][0-9a-f]," 16 line_re)
string(REGEX REPLACE "(${line_re})" "\\1\n  " bytes "${bytes}")

set(header "// Generated at build time from src/server/webui/index.html by embed.cmake. Do not edit.
#pragma once
#include <cstddef>
#include <string_view>

namespace gem::server::webui {

// The chat page served at GET / (${nbytes} bytes).
inline constexpr unsigned char kIndexHtml[] = {
  ${bytes}
};
inline constexpr std::size_t kIndexHtmlSize = ${nbytes};
inline std::string_view index_html() {
  return {reinterpret_cast<const char*>(kIndexHtml), kIndexHtmlSize};
}
// Content-Security-Policy for the page: only its own inline script and style run.
inline constexpr char kIndexCsp[] = \"${csp}\";

}  // namespace gem::server::webui
")
# Rewrite only on change, so an unchanged page does not rebuild the server.
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
  if(old STREQUAL header)
    return()
  endif()
endif()
file(WRITE "${OUTPUT}" "${header}")
