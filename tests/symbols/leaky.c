/* The symbol check's own test (tests/symbols/check.sh --expect): a file as a
 * future backend might add it, with names that would collide in a user's program. */
int vk;
int vkb_opts = 1;
void vk_api_load(void);
void vk_api_load(void) {}
void ferry__well_named(void);
void ferry__well_named(void) {}
static int file_local;
int *ferry__use_file_local(void);
int *ferry__use_file_local(void) { return &file_local; }
