#include "app/commands.hpp"
#include "core/error.hpp"
namespace st::app {
int doctor_command(World&) { return kExitUsage; }
}
