// module.cpp: the Python module tutti_torch._C: BackendTutti and its Options as subclasses of
// torch's c10d Backend and Backend.Options, and tutti's version. tutti_torch/__init__.py
// registers the backend with torch.distributed.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

#include "backend.h"

namespace py = pybind11;
using tutti_torch::BackendTutti;

PYBIND11_MODULE(_C, m)
{
    m.doc() = "tutti's c10d Backend for torch.distributed (see tutti_torch)";
    // The base types (Backend, Backend.Options, Store) are torch's: import them first.
    py::module::import("torch.distributed");

    py::class_<BackendTutti::Options, c10d::Backend::Options,
               c10::intrusive_ptr<BackendTutti::Options>>(
        m, "Options",
        "Options of a tutti process group, for init_process_group(..., pg_options=) and "
        "new_group(..., pg_options=). 0 or \"\" keeps tutti's default (set by TUTTI_INLINE_MAX, "
        "CCL_WORKER_COUNT and TUTTI_TRANSPORT).")
        .def(py::init([](std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<BackendTutti::Options>(timeout);
             }),
             py::arg("timeout") = kBackendDefaultTimeout)
        .def_readwrite("inline_max", &BackendTutti::Options::inline_max,
                       "bytes up to which an asynchronous collective on an idle group runs in "
                       "the caller's thread (faster, but the call then returns only once the "
                       "peers joined); 0: TUTTI_INLINE_MAX if set, else never; -1: never")
        .def_readwrite("worker_count", &BackendTutti::Options::worker_count,
                       "tutti's worker threads per communicator; 0: CCL_WORKER_COUNT or 1")
        .def_readwrite("_default_group", &BackendTutti::Options::default_group,
                       "set by tutti_torch's creator for init_process_group's group")
        .def_readwrite("_key_prefix", &BackendTutti::Options::key_prefix,
                       "set by tutti_torch's creator: where the group's keys go in its store")
        .def_readwrite("transport", &BackendTutti::Options::transport,
                       "\"auto\", \"shm\" or \"ofi\"; \"\": TUTTI_TRANSPORT or auto");

    py::class_<BackendTutti, c10d::Backend, c10::intrusive_ptr<BackendTutti>>(
        m, "BackendTutti",
        "tutti's c10d Backend. torch.distributed makes it for init_process_group('tutti') and "
        "new_group once tutti_torch is imported.")
        .def(py::init([](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                         c10::intrusive_ptr<BackendTutti::Options> options) {
                 return c10::make_intrusive<BackendTutti>(store, rank, size, std::move(options));
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("options"),
             py::call_guard<py::gil_scoped_release>())
        .def_property_readonly(
            "transport",
            [](const BackendTutti &b) {
                std::vector<std::string> out;
                for (int p = 0; p < b.getSize(); p++) {
                    const char *t = tutti_comm_transport(b.comm(), p);
                    out.emplace_back(t ? t : "?");
                }
                return out;
            },
            "the transport tutti uses towards each rank (\"self\", \"shm\", \"ofi\")")
        .def_property_readonly(
            "timeout", [](const BackendTutti &b) { return b.timeout(); },
            "the timeout of every operation (init_process_group's, or set later)")
        .def_property_readonly(
            "node_count", [](const BackendTutti &b) { return tutti_comm_node_count(b.comm()); },
            "the number of nodes the group spans")
        .def_property_readonly(
            "options",
            [](BackendTutti &b) {
                return c10::static_intrusive_pointer_cast<BackendTutti::Options>(
                    b.getBackendOptions());
            },
            "a copy of the group's Options");

    m.def("version", [] { return std::string(tutti_version()); }, "tutti's library version");
}
