// Minimal channel host for benchmarks/channel_floor.py: answers every inlining decision with
// `inlining_default` (the last feature; all inliner features are int64 [1]). Usage: host BASE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
int main(int argc, char **argv) {
  char in[4096], out[4096];
  snprintf(in, sizeof in, "%s.in", argv[1]);
  snprintf(out, sizeof out, "%s.out", argv[1]);
  FILE *w = fopen(in, "wb");
  FILE *r = fopen(out, "rb");
  if (!w || !r) return 2;
  static char line[1 << 20];
  if (!fgets(line, sizeof line, r)) return 0;
  int n = 0;
  for (char *p = line; (p = strstr(p, "\"name\"")); p++) n++;
  n -= 1;  // the advice spec also has a name
  int64_t *buf = malloc(8 * n + 1);
  while (fgets(line, sizeof line, r)) {
    if (strncmp(line, "{\"observation\"", 14) == 0) {
      if (fread(buf, 1, 8 * n + 1, r) != (size_t)(8 * n + 1)) return 3;
      int64_t adv = buf[n - 1];
      fwrite(&adv, 8, 1, w);
      fflush(w);
    }
  }
  return 0;
}
