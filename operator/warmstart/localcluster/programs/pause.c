/*
 * pause: the process that holds a pod sandbox's namespaces on the local cluster's real node.
 *
 * It sleeps until SIGINT or SIGTERM (then exits 0) and reaps any zombie it inherits as PID 1.
 * Built with `gcc -static` by warmstart/localcluster/images, so the image needs no libc.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
    (void)signo;
    _exit(0);
}

static void on_child(int signo) {
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {0};
    stop.sa_handler = on_stop;
    if (sigaction(SIGINT, &stop, NULL) != 0 || sigaction(SIGTERM, &stop, NULL) != 0) {
        return 1;
    }
    struct sigaction child = {0};
    child.sa_handler = on_child;
    child.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &child, NULL) != 0) {
        return 1;
    }
    for (;;) {
        pause();
    }
}
