/*
 * hello: the only file of the local cluster's shell-less test image (no shell, no libc, nothing else).
 *
 * The image pre-pull DaemonSet never runs an image's own entrypoint; this one only proves, if run, that it
 * is the test image. Built with `gcc -static` by warmstart/localcluster/images.
 */
#include <unistd.h>

int main(void) {
    static const char message[] = "warmstart shell-less test image\n";
    return write(STDOUT_FILENO, message, sizeof message - 1) == (ssize_t)(sizeof message - 1) ? 0 : 1;
}
