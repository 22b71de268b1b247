// errors.h: how tutti_torch says what went wrong: every text starts with "tutti <op>: ", so a
// user sees which backend and which call spoke, and a tutti status becomes tutti's own words.
#pragma once

#include <string>

#include <tutti.h>

namespace tutti_torch {

// prefixed is "tutti <op>: <msg>".
std::string prefixed(const std::string &op, const std::string &msg);

// refuse throws std::runtime_error (RuntimeError in Python) with prefixed(op, msg).
[[noreturn]] void refuse(const std::string &op, const std::string &msg);

// status_text explains a failed tutti call: the thread's last error (the most specific), else
// comm's, else the status's own text, followed by the status's text in parentheses.
std::string status_text(tutti_status_t st, const tutti_comm_t *comm);

// with_hint is text, followed by hint where st is a mismatch and hint is not empty: what the
// tutti call a torch op ran as means in the op's own terms (gather runs as an alltoallv).
std::string with_hint(tutti_status_t st, const std::string &text, const std::string &hint);

} // namespace tutti_torch
