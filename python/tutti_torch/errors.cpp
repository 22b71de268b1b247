// errors.cpp: the error texts of tutti_torch (see errors.h).
#include "errors.h"

#include <stdexcept>

namespace tutti_torch {

std::string prefixed(const std::string &op, const std::string &msg)
{
    return "tutti " + op + ": " + msg;
}

void refuse(const std::string &op, const std::string &msg)
{
    throw std::runtime_error(prefixed(op, msg));
}

std::string status_text(tutti_status_t st, const tutti_comm_t *comm)
{
    std::string text = tutti_last_error();
    if (text.empty() && comm != nullptr)
        text = tutti_comm_last_error(comm);
    if (text.empty())
        return tutti_strerror(st);
    return text + " (" + tutti_strerror(st) + ")";
}

std::string with_hint(tutti_status_t st, const std::string &text, const std::string &hint)
{
    if (st != TUTTI_ERR_MISMATCH || hint.empty())
        return text;
    return text + " [" + hint + "]";
}

} // namespace tutti_torch
