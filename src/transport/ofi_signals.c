/* ofi_signals.c: gives back the signals that libfabric's dependencies took when the library
 * was loaded.
 *
 * Debian's libfabric links the PSM provider, whose libinfinipath has a library constructor that
 * installs its own handlers for SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM in every
 * process that loads libfabric, unless IPATH_NO_BACKTRACE is set. Its handler writes a
 * "*.btr" backtrace file into the working directory and calls exit(1): Ctrl-C and a launcher's
 * SIGTERM end the program with status 1 instead of the signal, and exit() run from a signal
 * that came in during the program's own exit can deadlock (it did: torchrun's SIGTERM to a
 * rank that was exiting left it hanging). Every program that links tutti pays for this, whether
 * or not it uses the ofi transport.
 *
 * This constructor runs after libinfinipath's (the dependencies of a library are initialised
 * first) and before main: any handler that lies in libinfinipath or libpsm is put back to the
 * default, which is what a program has before its main runs. A host that had handlers of its
 * own before it loaded tutti (an interpreter) cannot get them back from here: tutti_torch sets
 * IPATH_NO_BACKTRACE and HFI_NO_BACKTRACE before it loads the library, so that they are never
 * replaced. */
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>

/* psm_owns says whether the handler at h lies in libinfinipath or libpsm (PSM, PSM2). */
static bool psm_owns(void *h)
{
    Dl_info info;
    if (h == NULL || dladdr(h, &info) == 0 || info.dli_fname == NULL)
        return false;
    const char *base = strrchr(info.dli_fname, '/');
    base = base != NULL ? base + 1 : info.dli_fname;
    return strncmp(base, "libinfinipath", 13) == 0 || strncmp(base, "libpsm", 6) == 0;
}

__attribute__((constructor)) static void tutti__ofi_give_back_signals(void)
{
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction a;
        if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &a) != 0)
            continue;
        void *h = (a.sa_flags & SA_SIGINFO) ? (void *)a.sa_sigaction : (void *)a.sa_handler;
        if (h == (void *)SIG_DFL || h == (void *)SIG_IGN || !psm_owns(h))
            continue;
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        (void)sigaction(sig, &dfl, NULL);
    }
}
