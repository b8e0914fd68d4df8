/* Builds against an installed libferry_mpi (find_package(ferry): ferry::mpi, and
 * pkg-config ferry-mpi); linked, not run (that takes mpirun). */
#include <ferry_mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ferry_device *dev = NULL;
  ferry_status st = ferry_mpi_local_device(MPI_COMM_WORLD, false, &dev);
  printf("ferry_mpi_local_device: %s\n", ferry_status_name(st));
  MPI_Finalize();
  return st == FERRY_OK ? 0 : 1;
}
