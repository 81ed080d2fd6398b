/* `cordon-launcher --kill-user`: see kill-user.c. */
#ifndef CORDON_KILL_USER_H
#define CORDON_KILL_USER_H

#include <sys/types.h>

/* Ends every process of `uid` (taking that uid and `gid` first); the process's exit status. */
int kill_user_processes(uid_t uid, gid_t gid);

#endif
