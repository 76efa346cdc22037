// Test job: a shared library that forgot WEIR_JOB; loading must say so.
extern "C" int weir_something_else() { return 42; }
