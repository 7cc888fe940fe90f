#ifndef __SCALE_H__
#define __SCALE_H__

#include <pmsis.h>

#endif
