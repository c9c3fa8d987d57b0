// Text from files, snapshots or peers made safe to print on a terminal or to paste into a shell
// comment.
#pragma once

#include <string>
#include <string_view>

namespace commkit {

// Control bytes (ESC, CR, BEL, C1 controls, DEL), NUL and bytes that are not valid UTF-8 become
// visible escapes ("\x1b"); newlines are kept when keep_newlines, tabs always. Valid UTF-8 text
// passes unchanged, so the result is always valid UTF-8 (JSON writers accept it).
std::string EscapeControl(std::string_view text, bool keep_newlines = true);

// Removes terminal escape sequences (CSI "ESC [ ... final", OSC "ESC ] ... BEL|ESC \\", and
// "ESC intermediates final" such as "ESC ( B"): what tools such as nvidia-smi write into captured
// text even when redirected.
std::string StripTerminalEscapes(std::string_view text);

}  // namespace commkit
