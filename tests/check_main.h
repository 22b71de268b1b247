/* check_main.h: the one main() of every Check suite in tests/, as a macro: a suite file ends with
 * TH_CHECK_MAIN(its_suite) instead of its own copy of the runner. */
#ifndef TUTTI_TEST_CHECK_MAIN_H
#define TUTTI_TEST_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

/* th_check_run runs every test of s (and frees it) and returns the process's exit status:
 * EXIT_SUCCESS only if none failed. Check reads its output settings from the environment:
 * meson sets CK_TAP_LOG_FILE_NAME=/dev/stdout and CK_VERBOSITY=silent, so that stdout is a pure
 * TAP stream there; run by hand, the binary prints Check's usual summary. */
static inline int th_check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* th_suite_of_one makes a Suite of one test in one TCase with a timeout (in seconds). */
static inline Suite *th_suite_of_one(const char *suite, const char *tcase, double timeout_s,
                                     const TTest *test)
{
    Suite *s = suite_create(suite);
    TCase *tc = tcase_create(tcase);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
    return s;
}

/* TH_CHECK_MAIN(make_suite) defines main() to run the Suite that make_suite() returns. */
#define TH_CHECK_MAIN(make_suite)                                                              \
    int main(void)                                                                             \
    {                                                                                          \
        return th_check_run(make_suite());                                                     \
    }

/* TH_CHECK_MAIN_ONE(suite, tcase, timeout_s, test) defines main() to run that one test. */
#define TH_CHECK_MAIN_ONE(suite, tcase, timeout_s, test)                                       \
    int main(void)                                                                             \
    {                                                                                          \
        return th_check_run(th_suite_of_one(suite, tcase, timeout_s, test));                   \
    }

#endif /* TUTTI_TEST_CHECK_MAIN_H */
