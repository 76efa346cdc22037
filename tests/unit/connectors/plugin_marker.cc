// A library that announces that it was loaded: its constructor creates the
// file named by WEIR_PLUGIN_MARKER. The connector tests hand it to
// kafka.plugin.library.paths to prove that validating a job never loads it.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>

__attribute__((constructor)) static void WeirPluginMarkerLoaded() {
  const char* path = std::getenv("WEIR_PLUGIN_MARKER");
  if (path == nullptr) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
}

// librdkafka looks for this entry point in a plugin.
extern "C" int conf_init(void*, void**, char*, std::size_t) { return 0; }
